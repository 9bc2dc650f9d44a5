"""`grounded up` stops cleanly: SIGTERM (to the process alone, as `docker stop` sends) while
it is still starting, and Ctrl-C (SIGINT to its process group, as a terminal sends) while it
serves, end it with exit code 0 within a deadline, and none of the processes it started
survive; and a SIGKILL of the whole appliance loses no acknowledged upload, no usage and no
budget spent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from tests.appliances import free_port
from tests.conftest import CORPUS, engine_environment
from tests.tiny_model import build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STOP_DEADLINE_S = 60
DAY_BUDGET = 3000  # hooli's tokens_per_day
QUESTION = [{"role": "user", "content": "How many days of annual leave do employees get?"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md"))
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", text)


def write_config(folder: Path, model: Path) -> tuple[Path, int]:
    port = free_port()
    fractional = {"num_cpus": 0.1}
    config = {
        "data_dir": str(folder / "data"),
        "generator": {"model": str(model), "max_model_len": 4096, "max_tokens": 8,
                      "engine_kwargs": {"enforce_eager": True, "dtype": "float32",
                                        "kv_cache_memory_bytes": 256 * 2**20}},
        "budgets": {"tenants": {"hooli": {"tokens_per_day": DAY_BUDGET}}},
        "serve": {"port": port, "metrics_port": free_port(), "dashboard_port": free_port(),
                  "generator_threads": 1,
                  "deployments": {name: fractional
                                  for name in ("ingress", "embedder", "shards", "generator")}},
    }  # fmt: skip
    path = folder / "grounded.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def survivors(processes: list[psutil.Process]) -> list[str]:
    alive = []
    for process in processes:
        try:  # is_running() also checks the creation time, so a reused pid is not counted
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{process.pid} {process.name()}")
        except psutil.NoSuchProcess:
            pass
    return alive


def launch(config: Path, tmp_path: Path) -> subprocess.Popen:
    """`grounded up` in its own process group (as a terminal runs it), its output in a file
    (a pipe nobody reads while it serves would fill and stall it): ``output(process)``."""
    env = {**os.environ, **engine_environment(), "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    grounded = Path(sys.executable).with_name("grounded")
    log = tmp_path / f"up-{time.monotonic_ns()}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [str(grounded), "up", "--config", str(config), "--no-dashboard"],  # after `up`
            env=env, cwd=tmp_path, start_new_session=True, stdout=sink, stderr=sink,
        )  # fmt: skip
    process.log = log
    return process


def output(process: subprocess.Popen) -> str:
    return process.log.read_text(errors="replace")


def wait_until(process: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + 300
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"grounded up ended: {output(process)}")
        assert time.monotonic() < deadline, "grounded up did not get there in 300 s"
        time.sleep(1)


def stops_cleanly(process: subprocess.Popen, signum: int, to_group: bool) -> None:
    """Send ``signum`` (to the process group, or to `grounded up` alone): it exits 0, says
    so, within the deadline, and none of the processes it started survive."""
    started = descendants(process.pid)
    assert started, "grounded up started no process"
    try:
        if to_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        process.wait(timeout=STOP_DEADLINE_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1)
        left = survivors(started)
        for leftover in left:
            os.kill(int(leftover.split()[0]), signal.SIGKILL)
    said = output(process)
    assert process.returncode == 0, said
    assert "stopped in" in said, said
    assert left == [], f"processes left running: {left}\n{said}"


def test_up_stops_cleanly_on_sigterm_while_starting(tiny, tmp_path):
    """SIGTERM to `grounded up` alone (`docker stop` of a container still starting), once Ray
    runs. Ctrl-C while serving is checked by the SIGKILL test below, on the appliance it
    restarts (each start of an appliance costs tens of seconds)."""
    config, _ = write_config(tmp_path, tiny)
    process = launch(config, tmp_path)
    wait_until(process, lambda: any("raylet" in p.name() for p in descendants(process.pid)))
    stops_cleanly(process, signal.SIGTERM, to_group=False)


def test_sigkill_during_api_uploads_loses_no_acknowledged_upload(tiny, tmp_path):
    """The whole appliance (its process group) killed while a client uploads: after a restart
    every upload that was answered 200 is listed, whole, and searchable; nothing half-written;
    and the usage and budget spent before the kill are all still counted."""
    import threading

    import openai

    from serve.accounting.budgets import Ledger
    from serve.config import load_config
    from serve.identity.keys import KeyStore

    config, port = write_config(tmp_path, tiny)
    keys = KeyStore(tmp_path / "data")
    _, secret = keys.create("acme", ["query", "ingest"])
    _, hooli_secret = keys.create("hooli", ["query", "ingest"])
    filler = "Ordinary filler text for the chunker. "
    texts = {f"note-{i:03d}.md": f"# Note {i}\n\nThe code word of note {i} is zq{i:03d}x. "
             + filler * (20 + i % 7) for i in range(200)}  # fmt: skip
    acknowledged: dict[str, str] = {}  # file id -> name
    process = launch(config, tmp_path)
    wait_until(process, lambda: healthy(port))
    started = descendants(process.pid)
    api = f"http://127.0.0.1:{port}/v1"
    client = openai.OpenAI(base_url=api, api_key=secret, max_retries=0, timeout=30)
    hooli = openai.OpenAI(base_url=api, api_key=hooli_secret, max_retries=0, timeout=120)
    handbook = (CORPUS / "acme" / "employee-handbook.md").read_bytes()
    hooli.files.create(file=("handbook.md", handbook), purpose="assistants")
    first = hooli.chat.completions.create(model="grounded", messages=QUESTION, max_tokens=1)
    used, prompt = first.usage.total_tokens, first.usage.prompt_tokens
    ledger = Ledger(tmp_path / "data", load_config(config).budgets)
    spent = ledger.usage("hooli")
    assert spent

    def upload() -> None:
        for name, text in texts.items():
            try:
                created = client.files.create(file=(name, text.encode()), purpose="assistants")
            except openai.APIError:
                return  # the appliance is gone
            acknowledged[created.id] = name

    uploader = threading.Thread(target=upload)
    try:
        uploader.start()
        while len(acknowledged) < 8:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # the whole appliance, mid-upload
        uploader.join(timeout=60)
        process.wait(timeout=30)
    finally:
        time.sleep(1)
        for leftover in survivors(started):
            os.kill(int(leftover.split()[0]), signal.SIGKILL)
    assert 8 <= len(acknowledged) < len(texts)
    process = launch(config, tmp_path)
    wait_until(process, lambda: healthy(port))
    try:
        listed = {f.id: f.filename for f in client.files.list().data}
        assert acknowledged.items() <= listed.items()  # every acknowledged upload survived
        for file_id, name in listed.items():  # and nothing is half-written
            stored = client.files.content(file_id).text
            assert stored.count(filler.strip()) == texts[name].count(filler.strip()), name
        for file_id, name in acknowledged.items():
            code = name.removeprefix("note-").removesuffix(".md")
            found = client.vector_stores.search("vs_acme", query=f"zq{code}x",
                                                max_num_results=50)  # fmt: skip
            assert file_id in {hit.file_id for hit in found.data}, name
        assert ledger.usage("hooli") == spent  # the usage recorded before the kill
        ledger.close()
        # prompt + max_tokens = DAY_BUDGET - prompt: admitted only if the first request were
        # forgotten
        with pytest.raises(openai.RateLimitError) as refused:
            hooli.chat.completions.create(
                model="grounded", messages=QUESTION, max_tokens=DAY_BUDGET - 2 * prompt
            )
        message = refused.value.response.json()["error"]["message"]
        assert f"has used {used} of its tokens_per_day budget of {DAY_BUDGET}" in message
        assert int(refused.value.response.headers["retry-after"]) <= 86_400
    finally:  # Ctrl-C: SIGINT to the process group, as a terminal sends
        stops_cleanly(process, signal.SIGINT, to_group=True)
