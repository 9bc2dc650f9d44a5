"""Sources a person can read (issue 68): every `make demo` question asked through the real
appliance with a key made for a chat window (`keys create --sources-in-text`), each answer's
message text printed with the file and page the `grounded` extension cites, so that one can
check that the sources written into the text name them. Uses the models `make demo` fetched
(``--models``, default data/models) and a fresh data directory.

    .venv/bin/python -m benchmarks.readable_sources [--models data/models]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=Path("data/models"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.basicConfig(level=logging.WARNING)

    import openai

    from serve.config import load_config
    from serve.identity.keys import key_store
    from serve.ops import up
    from serve.ops.demo import QUESTIONS, upload

    data = Path(tempfile.mkdtemp(prefix="grounded-readable-"))
    (data / "models").symlink_to(args.models.resolve())
    config = load_config(Path("configs/cpu.yaml"), data_dir=data)

    def ask_all(running: up.Running) -> None:
        for tenant, questions in QUESTIONS.items():
            keys = key_store(config)
            uploader = keys.create(tenant, ["query", "ingest"], name="upload")[1]
            upload(openai.OpenAI(base_url=running.api_url, api_key=uploader), tenant)
            window = keys.create(tenant, ["query"], name="chat window", sources_in_text=True)[1]
            client = openai.OpenAI(base_url=running.api_url, api_key=window, timeout=600)
            for question in questions:
                completion = client.chat.completions.create(
                    model="grounded", messages=[{"role": "user", "content": question}],
                    max_tokens=160,
                )  # fmt: skip
                cited = [(c["filename"], c.get("page"))
                         for c in completion.model_extra["grounded"]["citations"]]  # fmt: skip
                print(f"\n? {question}\n{completion.choices[0].message.content}\n"
                      f"(the extension cites: {cited})", flush=True)  # fmt: skip

    up.run_in_foreground(config, ask_all, wait=False, dashboard=False)


if __name__ == "__main__":
    main()
