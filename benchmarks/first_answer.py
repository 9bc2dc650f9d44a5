"""How soon a freshly started appliance serves: its start (configs/cpu.yaml, a temporary data
directory) until /health answers, then the first and the second checked answer, through the
official openai client, over the acme sample corpus.

    .venv/bin/python -m benchmarks.first_answer [--config configs/cpu.yaml]

The model is the config's, fetched into its data directory first (`grounded models fetch`);
GROUNDED_GENERATOR__MODEL=qwen2.5-0.5b GROUNDED_QUERY__MIN_ANSWER_SUPPORT=0.05 is the small model
with a check threshold its right answers clear. What a first request pays for shows by comparison:
`TORCHDYNAMO_DISABLE=0 TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)` gives vLLM's sampler its torch.compile
back with an empty cache, as on a new machine or container (serve/engine/generator.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private, local benchmark cluster

from serve.config import load_config

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("How many days of paid annual leave do employees get per year?",
             "What power supply does the GX-4200 controller need?")  # fmt: skip


def main() -> None:
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    args = parser.parse_args()
    base = load_config(Path(args.config))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "models").symlink_to((base.data_dir / "models").resolve())
        config = load_config(Path(args.config), data_dir=Path(tmp))
        started = time.perf_counter()
        running = up.start(config, dashboard=False)
        print(f"started (healthy) in {time.perf_counter() - started:.1f} s")
        try:
            key = KeyStore(config.data_dir).create("acme", name="first-answer")[1]
            client = openai.OpenAI(base_url=running.api_url, api_key=key, timeout=900,
                                   max_retries=0)  # fmt: skip
            for path in sorted((ROOT / "samples" / "corpus" / "acme").iterdir()):
                client.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
            for number, question in enumerate(QUESTIONS, 1):
                started = time.perf_counter()
                answer = client.chat.completions.create(
                    model="grounded", messages=[{"role": "user", "content": question}]
                )
                text = (answer.choices[0].message.content or "").replace("\n", " ")[:60]
                print(f"answer {number}: {time.perf_counter() - started:.2f} s  {text}")
        finally:
            running.stop()
    print(f"model {config.generator.model}; TORCHDYNAMO_DISABLE="
          f"{os.environ.get('TORCHDYNAMO_DISABLE', '(unset)')}; TORCHINDUCTOR_CACHE_DIR="
          f"{os.environ.get('TORCHINDUCTOR_CACHE_DIR', '(unset)')}")  # fmt: skip


if __name__ == "__main__":
    main()
