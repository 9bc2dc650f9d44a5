"""Text from page images through Tesseract (Debian's tesseract-ocr), one process per page.

Each page's process runs on one core (OMP_THREAD_LIMIT=1) at the idle priority, so a scan
being ingested leaves the CPU to answers first (at nice 19 where the idle priority gets no
CPU); a page is bounded in pixels and in time, and the reading stops (its process killed) as
soon as the file is deleted. Text read this way is marked in its heading path (OCR_MARK), so a
citation says where its words came from.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable

from index.config import LoaderLimits, OcrConfig
from index.errors import (
    FileTooLargeError,
    IngestCancelledError,
    MalformedDocumentError,
    OcrUnavailableError,
)

log = logging.getLogger(__name__)
OCR_MARK = "scanned, read by OCR"
# Tesseract runs only when the CPU is otherwise idle (Linux's SCHED_IDLE, util-linux's chrt):
# at a lower nice level it still takes a core from the generator's threads, which wait for
# each other (benchmarks/results/office-documents.md, "A scan ingested while another tenant
# asks"). But where no core is ever idle, SCHED_IDLE gets a process about 0.3 % of a core,
# less than the lowest normal priority (nice 19: about 1.4 % beside one busy thread), and an
# unprivileged process may not leave SCHED_IDLE (sched(7), RLIMIT_NICE). So a page that got
# less than STARVED_SHARE of a core over index.ocr.idle_wait_s is read again, from the start,
# at nice 19. Where chrt is missing, nice 19 from the start.
# A page is bounded in the CPU time it takes (prlimit) and, in all, waits WAIT_FACTOR times that.
_NICE = ("nice", "-n", "19")
_PRIORITIES = (("chrt", "--idle", "0"), _NICE) if shutil.which("chrt") else (_NICE,)
STARVED_SHARE = 0.01
_CPU_LIMIT = shutil.which("prlimit") is not None
WAIT_FACTOR = 10
_INSTALL = "apt-get install tesseract-ocr tesseract-ocr-fra (make setup does)"
POLL_S = 0.5  # how often a page being read asks whether its file is still wanted


class _Starved(Exception):
    """The page's process got less than STARVED_SHARE of a core (and was killed)."""


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def _never() -> bool:
    return False


def check_pixels(width: int, height: int, file_name: str, limits: LoaderLimits) -> None:
    if width * height > limits.max_image_pixels:
        raise FileTooLargeError(
            file_name,
            f"an image of {width:,} x {height:,} pixels is more than "
            f"limits.max_image_pixels ({limits.max_image_pixels:,})",
        )


class OcrReader:
    """Reads the page images of one file as ``config`` says; ``cancelled()`` is asked before
    and while each page is read (a file deleted while it is ingested), and a true answer
    stops the file with IngestCancelledError."""

    def __init__(self, config: OcrConfig, cancelled: Callable[[], bool] = _never) -> None:
        self.config, self.cancelled = config, cancelled

    def check(self, file_name: str) -> None:
        """Refuse before any work when this host cannot read scans as configured."""
        if not self.config.enabled:
            raise OcrUnavailableError(
                file_name, "this file needs OCR, and index.ocr.enabled is false"
            )
        if shutil.which("tesseract") is None:
            raise OcrUnavailableError(
                file_name, f"this file needs OCR, and Tesseract is not installed: {_INSTALL}"
            )

    def read(self, image, file_name: str, where: str) -> str:
        """The text of one PIL image (``where``: "page 3", for messages)."""
        config = self.config
        languages = "+".join(config.languages)
        seconds = max(1, math.ceil(config.page_timeout_s))
        limit = ["prlimit", f"--cpu={seconds}"] if _CPU_LIMIT else []
        tesseract = [*limit, "tesseract", "stdin", "stdout", "-l", languages]
        wait_s = WAIT_FACTOR * config.page_timeout_s
        deadline = time.monotonic() + wait_s
        # Tesseract reads the page from a file: a pipe's writes stop where communicate()'s
        # first timeout falls (a retry sends no more input), and the page would wait forever.
        with tempfile.TemporaryFile() as page:
            image.save(page, format="PNG")
            for priority in _PRIORITIES:
                self._stop_if_cancelled(file_name)
                starved_s = math.inf if priority is _PRIORITIES[-1] else config.idle_wait_s
                page.seek(0)
                try:
                    out, err, returncode = self._run(
                        [*priority, *tesseract], page, file_name, deadline, starved_s
                    )
                    break
                except _Starved:
                    log.warning(
                        "%s: OCR of %s got less than %d %% of a core over %g s at %s; "
                        "reading it again at nice 19",
                        file_name, where, STARVED_SHARE * 100, starved_s, " ".join(priority),
                    )  # fmt: skip
        if returncode is None:
            raise MalformedDocumentError(
                file_name,
                f"OCR of {where} waited more than {wait_s:g} s for a CPU ({WAIT_FACTOR} times "
                "index.ocr.page_timeout_s); this host is too busy to read scans now",
            )
        if returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # over the CPU limit
            raise MalformedDocumentError(
                file_name,
                f"OCR of {where} took longer than index.ocr.page_timeout_s "
                f"({config.page_timeout_s:g} s of CPU)",
            )
        message = err.decode("utf-8", "replace").strip()
        if returncode != 0:
            if "Failed loading language" in message:
                raise OcrUnavailableError(
                    file_name,
                    f"a Tesseract language pack of index.ocr.languages ({languages}) is not "
                    "installed: apt-get install tesseract-ocr-<language>",
                )
            raise MalformedDocumentError(file_name, f"OCR failed on {where}: {message[-300:]}")
        return out.decode("utf-8", "replace")

    def _run(self, command, page, file_name: str, deadline: float, starved_s: float):
        """(stdout, stderr, returncode) of one Tesseract process reading ``page``; returncode
        None when it did not finish by ``deadline``. _Starved when it got less than
        STARVED_SHARE of a core over ``starved_s`` seconds. Whenever the process is not left
        to finish, it is killed and waited for."""
        try:
            process = subprocess.Popen(
                command,
                stdin=page,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, "OMP_THREAD_LIMIT": "1"},
            )
        except FileNotFoundError as exc:
            raise OcrUnavailableError(file_name, f"Tesseract is not installed: {_INSTALL}") from exc
        window_at, window_cpu = time.monotonic(), 0.0
        with process:
            try:
                while True:
                    try:
                        timeout = max(0.0, min(POLL_S, deadline - time.monotonic()))
                        out, err = process.communicate(timeout=timeout)
                        return out, err, process.returncode
                    except subprocess.TimeoutExpired:
                        now = time.monotonic()
                    if now >= deadline:
                        process.kill()
                        process.communicate()
                        return b"", b"", None
                    self._stop_if_cancelled(file_name)
                    if now - window_at >= starved_s:
                        cpu = _cpu_seconds(process.pid)
                        if cpu is not None and cpu - window_cpu < STARVED_SHARE * starved_s:
                            raise _Starved
                        window_at, window_cpu = now, cpu or 0.0
            except BaseException:
                process.kill()
                process.communicate()
                raise

    def _stop_if_cancelled(self, file_name: str) -> None:
        if self.cancelled():
            raise IngestCancelledError(
                file_name, "deleted while it was being ingested; nothing of it was kept"
            )
