"""Remote sources' transport: native Python clients (boto3, webdav4) against rclone, listing and
reading the same files on a local S3 (moto_server) and a local WebDAV server (wsgidav).

    .venv/bin/python -m benchmarks.source_transports [--files 10000]

Both servers start on free loopback ports with ``--files`` small text files (1-2 KB, 50 folders).
Each case runs in a process of its own, twice; the faster run is reported. Listing: wall time,
the HTTP requests the server logged, the Python process's RSS growth (its peak over its RSS
before), rclone's peak RSS, and what each entry carries. Reading: 200 files spread over the tree,
one by one, each checked (``rclone cat``: a process per file; ``rclone copy --files-from``: one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

BIN = Path(sys.executable).parent
READS = 200
WORDS = ["leave", "travel", "expense", "policy", "approval", "manager", "budget", "claim",
         "receipt", "hotel", "train", "meal"]  # fmt: skip
KEYS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}
FAST = ["--no-mimetype", "--use-server-modtime"]  # else rclone HEADs every S3 object
REQUEST_LINE = re.compile(r'HTTP/1\.1" \d{3}|" depth=|Got OPTIONS')  # moto's and wsgidav's logs

Ports = tuple[int, int]
Entries = dict[str, dict[str, object]]


def key(n: int) -> str:
    return f"dir{n % 50}/file{n}.txt"


def content(n: int) -> bytes:
    words = " ".join(WORDS[(n * 7 + i) % len(WORDS)] for i in range(150 + n % 100))
    return f"Document {n}. {words}. Marker{n}.\n".encode()


def picked(files: int) -> list[int]:
    return list(range(0, files, max(1, files // READS)))[:READS]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: list[str], port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{command[0]} did not listen on {port}: {log.read_text()[-2000:]}")


def s3_client(ports: Ports):
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{ports[0]}", **KEYS)
    client.list_buckets()  # the imports and the connection before any timed call
    return client


def dav_client(ports: Ports):
    from webdav4.client import Client

    client = Client(f"http://127.0.0.1:{ports[1]}")
    client.options("")  # the imports and the connection before any timed call
    return client


def fill(folder: Path, ports: Ports, files: int) -> None:
    client = s3_client(ports)
    client.create_bucket(Bucket="docs")
    for n in range(50):
        (folder / f"dir{n}").mkdir()
    for n in range(files):
        (folder / key(n)).write_bytes(content(n))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: client.put_object(Bucket="docs", Key=key(n), Body=content(n)),
                      range(files)))  # fmt: skip


def rclone(*args: str) -> bytes:
    return subprocess.run(["rclone", *args], capture_output=True, check=True).stdout


def lsjson(remote: str, *flags: str) -> Entries:
    out = rclone("lsjson", "-R", "--files-only", "--hash", *flags, remote)
    return {
        e["Path"]: {"size": e["Size"], "mtime": e["ModTime"], "md5": e.get("Hashes", {}).get("md5")}
        for e in json.loads(out)
    }


def boto3_list(ports: Ports, files: int) -> Callable[[], Entries]:
    pages = s3_client(ports).get_paginator("list_objects_v2")
    return lambda: {
        o["Key"]: {"size": o["Size"], "mtime": o["LastModified"], "etag": o["ETag"]}
        for page in pages.paginate(Bucket="docs")
        for o in page.get("Contents", [])
    }


def webdav4_walk(ports: Ports, files: int) -> Callable[[], Entries]:
    client = dav_client(ports)

    def walk(path: str) -> Entries:
        found: Entries = {}
        for e in client.ls(path, detail=True):
            if e["type"] == "directory":
                found |= walk(e["name"])
            else:
                found[e["name"]] = {"size": e["content_length"], "mtime": e["modified"],
                                    "etag": e["etag"]}  # fmt: skip
        return found

    return lambda: walk("")


def webdav4_infinity(ports: Ports, files: int) -> Callable[[], Entries]:
    client = dav_client(ports)

    def listing() -> Entries:
        tree = client.propfind("", headers={"Depth": "infinity"}).responses.items()
        props = {href.lstrip("/"): r.properties for href, r in tree}
        return {path: {"size": p.content_length, "mtime": p.modified, "etag": p.etag}
                for path, p in props.items() if p.resource_type == "file"}  # fmt: skip

    return listing


def reads(fetch: Callable[[str], bytes], files: int) -> int:
    for n in picked(files):
        assert fetch(key(n)) == content(n), key(n)
    return len(picked(files))


def boto3_get(ports: Ports, files: int) -> Callable[[], int]:
    client = s3_client(ports)
    return lambda: reads(lambda k: client.get_object(Bucket="docs", Key=k)["Body"].read(), files)


def webdav4_open(ports: Ports, files: int) -> Callable[[], int]:
    client = dav_client(ports)

    def fetch(k: str) -> bytes:
        with client.open(k, "rb") as f:
            return f.read()

    return lambda: reads(fetch, files)


def rclone_cat(remote: str, files: int) -> int:
    return reads(lambda k: rclone("cat", remote + k), files)


def rclone_copy(remote: str, files: int) -> int:
    with tempfile.TemporaryDirectory() as into:
        wanted = Path(into, "wanted.txt")
        wanted.write_text("".join(key(n) + "\n" for n in picked(files)))
        rclone("copy", "--files-from", str(wanted), "--no-traverse", remote, f"{into}/out")
        return reads(lambda k: Path(into, "out", k).read_bytes(), files)


CAT, COPY = "rclone cat, a process per file", "rclone copy --files-from, one process"
LISTS = {  # case: (server, client and method, its setup: (ports, files) -> the timed call)
    "s3-boto3": ("S3", "boto3 list_objects_v2 paginator", boto3_list),
    "s3-rclone": ("S3", "rclone lsjson -R --hash", lambda p, f: lambda: lsjson("s3:docs")),
    "s3-rclone-fast": ("S3", f"rclone lsjson -R --hash {' '.join(FAST)}",
                       lambda p, f: lambda: lsjson("s3:docs", *FAST)),
    "dav-webdav4-walk": ("WebDAV", "webdav4 ls per folder (Depth: 1)", webdav4_walk),
    "dav-webdav4-infinity": ("WebDAV", "webdav4 one PROPFIND Depth: infinity", webdav4_infinity),
    "dav-rclone": ("WebDAV", f"rclone lsjson -R --hash {' '.join(FAST)}",
                   lambda p, f: lambda: lsjson("dav:", *FAST)),
}  # fmt: skip
READERS = {
    "s3-boto3-get": ("S3", "boto3 get_object", boto3_get),
    "s3-rclone-cat": ("S3", CAT, lambda p, f: lambda: rclone_cat("s3:docs/", f)),
    "s3-rclone-copy": ("S3", COPY, lambda p, f: lambda: rclone_copy("s3:docs", f)),
    "dav-webdav4-open": ("WebDAV", "webdav4 client.open", webdav4_open),
    "dav-rclone-cat": ("WebDAV", CAT, lambda p, f: lambda: rclone_cat("dav:", f)),
    "dav-rclone-copy": ("WebDAV", COPY, lambda p, f: lambda: rclone_copy("dav:", f)),
}  # fmt: skip


def vm(field: str) -> int:  # not ru_maxrss: it keeps the peak of the parent that forked us
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M)[1]) * 1024


def requests(log: Path) -> int:
    return len(REQUEST_LINE.findall(log.read_text()))


def child(case: str, ports: Ports, files: int, log: Path) -> None:
    """One case in this process: its figures as a JSON line."""
    os.environ.pop("AWS_CA_BUNDLE", None)  # rclone's S3 fails on one: "unsupported transport"
    os.environ.update(RCLONE_CONFIG="/dev/null", RCLONE_CONFIG_S3_TYPE="s3",
        RCLONE_CONFIG_S3_PROVIDER="Other", RCLONE_CONFIG_S3_ENDPOINT=f"http://127.0.0.1:{ports[0]}",
        RCLONE_CONFIG_S3_ACCESS_KEY_ID="test", RCLONE_CONFIG_S3_SECRET_ACCESS_KEY="test",
        RCLONE_CONFIG_DAV_TYPE="webdav", RCLONE_CONFIG_DAV_URL=f"http://127.0.0.1:{ports[1]}",
        RCLONE_CONFIG_DAV_VENDOR="other")  # fmt: skip
    timed = {**LISTS, **READERS}[case][2](ports, files)
    time.sleep(0.5)  # the server's log written (here and below)
    logged = requests(log)
    Path("/proc/self/clear_refs").write_text("5")
    before = vm("VmRSS")
    started = time.perf_counter()
    result = timed()
    figures: dict[str, object] = {"seconds": time.perf_counter() - started}
    if case in LISTS:
        assert len(result) == files, (case, len(result))
        figures["yields"] = ", ".join(k for k, v in result[key(0)].items() if v is not None)
        figures["growth_mib"] = (vm("VmHWM") - before) / 2**20
        figures["rclone_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    time.sleep(0.5)
    figures["requests"] = requests(log) - logged
    print(json.dumps(figures))


def best(case: str, ports: Ports, files: int, log: Path) -> dict:
    """The faster of two runs, each in a new process."""
    command = [sys.executable, "-m", "benchmarks.source_transports", "--case", case, "--ports",
               f"{ports[0]},{ports[1]}", "--files", str(files), "--log", str(log)]  # fmt: skip
    runs = [subprocess.run(command, capture_output=True, text=True, check=True) for _ in range(2)]
    return min((json.loads(r.stdout.splitlines()[-1]) for r in runs), key=lambda r: r["seconds"])


def table(cases: dict, ports: Ports, files: int, logs: dict[str, Path]) -> dict[str, dict]:
    """A row per case; each case's figures by its name."""
    found = {}
    for case, (server, method, _) in cases.items():
        r = found[case] = best(case, ports, files, logs[server])
        cells = [server, method, f"{r['seconds']:.2f}", f"{r['requests']:,}"]
        if cases is LISTS:
            rclone_mib = f"{r['rclone_mib']:.0f}" if "rclone" in case else "-"
            cells += [f"{r['growth_mib']:.1f}", rclone_mib, r["yields"]]
        else:
            cells.append(f"{1000 * r['seconds'] / len(picked(files)):.1f}")
        print(f"| {' | '.join(cells)} |", flush=True)
    return found


def report(ports: Ports, files: int, logs: dict[str, Path]) -> None:
    rclone_version = subprocess.run(["rclone", "version"], capture_output=True, text=True).stdout
    packages = ["boto3", "botocore", "moto", "webdav4", "httpx", "wsgidav", "cheroot"]
    print(f"{rclone_version.splitlines()[0]}; Python {sys.version.split()[0]}; "
          + ", ".join(f"{p} {version(p)}" for p in packages))  # fmt: skip
    print(f"\nListing {files:,} files (best of 2 runs):\n\n| server | client, method | wall s | "
          "requests | Python RSS growth MiB | rclone peak RSS MiB | per entry |\n"
          "|---|---|---|---|---|---|---|")  # fmt: skip
    listed = table(LISTS, ports, files, logs)
    print(f"\nReading {len(picked(files))} files one by one (best of 2 runs):\n\n| server | "
          "client, method | wall s | requests | ms per file |\n|---|---|---|---|---|")  # fmt: skip
    read = table(READERS, ports, files, logs)
    s3, dav = (listed["s3-rclone-fast"]["seconds"] / listed["s3-boto3"]["seconds"],
               read["s3-rclone-copy"]["seconds"] / read["s3-boto3-get"]["seconds"]), (
              listed["dav-rclone"]["seconds"] / listed["dav-webdav4-walk"]["seconds"],
              read["dav-rclone-copy"]["seconds"] / read["dav-webdav4-open"]["seconds"])  # fmt: skip
    near = all(ratio > 0.8 for ratio in (*s3, *dav))  # rclone nowhere more than 20 % faster
    verdict = "native clients" if near else "rclone is faster somewhere: see the tables"
    print(f"\nConclusion: rclone at its best (--no-mimetype --use-server-modtime; copy) against "
          f"the native clients (WebDAV: the Depth: 1 walk): S3 lists in {s3[0]:.1f}x, reads in "
          f"{s3[1]:.1f}x the time; WebDAV {dav[0]:.1f}x, {dav[1]:.1f}x -> {verdict}.")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        s3_port, dav_port = map(int, args.ports.split(","))
        child(args.case, (s3_port, dav_port), args.files, args.log)
        return
    with tempfile.TemporaryDirectory(prefix="grounded-transports-") as tmp:
        root = Path(tmp)
        (root / "dav").mkdir()
        ports = (free_port(), free_port())
        logs = {"S3": root / "moto.log", "WebDAV": root / "wsgidav.log"}
        commands = [[str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(ports[0])],
                    [str(BIN / "wsgidav"), "--host", "127.0.0.1", "--port", str(ports[1]), "--root",
                     str(root / "dav"), "--auth", "anonymous", "--no-config"]]  # fmt: skip
        servers = []
        try:
            for command, port, log in zip(commands, ports, logs.values(), strict=True):
                servers.append(start(command, port, log))
            started = time.perf_counter()
            fill(root / "dav", ports, args.files)
            print(f"{args.files:,} files written and uploaded in "
                  f"{time.perf_counter() - started:.0f} s\n", flush=True)  # fmt: skip
            report(ports, args.files, logs)
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=10)


if __name__ == "__main__":
    main()
