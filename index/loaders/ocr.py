"""Text from page images through Tesseract (Debian's tesseract-ocr), one process per page.

Each page's process runs on one core (OMP_THREAD_LIMIT=1) at the idle priority, so a scan
being ingested leaves the CPU to answers first; a page is bounded in pixels and in time,
and the reading stops (its process killed) as soon as the file is deleted. Text read this way
is marked in its heading path (OCR_MARK), so a citation says where its words came from.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import signal
import subprocess
from collections.abc import Callable

from index.config import LoaderLimits, OcrConfig
from index.errors import (
    FileTooLargeError,
    IngestCancelledError,
    MalformedDocumentError,
    OcrUnavailableError,
)

OCR_MARK = "scanned, read by OCR"
# Tesseract runs only when the CPU is otherwise idle (Linux's SCHED_IDLE, util-linux's chrt):
# at a lower nice level it still takes a core from the generator's threads, which wait for
# each other (benchmarks/results/office-documents.md, "A scan ingested while another tenant
# asks"). Where chrt is missing, nice.
# So a page is bounded in the CPU time it takes (prlimit), and waits for an idle CPU at most
# WAIT_FACTOR times that.
_IDLE = ["chrt", "--idle", "0"] if shutil.which("chrt") else ["nice", "-n", "19"]
_CPU_LIMIT = shutil.which("prlimit") is not None
WAIT_FACTOR = 10
_INSTALL = "apt-get install tesseract-ocr tesseract-ocr-fra (make setup does)"
POLL_S = 0.5  # how often a page being read asks whether its file is still wanted


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
        png = io.BytesIO()
        image.save(png, format="PNG")
        languages = "+".join(config.languages)
        seconds = max(1, math.ceil(config.page_timeout_s))
        limit = ["prlimit", f"--cpu={seconds}"] if _CPU_LIMIT else []
        command = [*_IDLE, *limit, "tesseract", "stdin", "stdout", "-l", languages]
        too_long = MalformedDocumentError(
            file_name,
            f"OCR of {where} took longer than index.ocr.page_timeout_s "
            f"({config.page_timeout_s:g} s of CPU)",
        )
        self._stop_if_cancelled(file_name)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, "OMP_THREAD_LIMIT": "1"},
            )
        except FileNotFoundError as exc:
            raise OcrUnavailableError(file_name, f"Tesseract is not installed: {_INSTALL}") from exc
        with process:
            out, err = self._wait(process, png.getvalue(), config, file_name, too_long)
        if process.returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # over the CPU limit
            raise too_long
        message = err.decode("utf-8", "replace").strip()
        if process.returncode != 0:
            if "Failed loading language" in message:
                raise OcrUnavailableError(
                    file_name,
                    f"a Tesseract language pack of index.ocr.languages ({languages}) is not "
                    "installed: apt-get install tesseract-ocr-<language>",
                )
            raise MalformedDocumentError(file_name, f"OCR failed on {where}: {message[-300:]}")
        return out.decode("utf-8", "replace")

    def _wait(self, process, data: bytes, config: OcrConfig, file_name: str, too_long):
        """(stdout, stderr) of the page's process; it is killed when the wait is over or the
        file is no longer wanted."""
        waited, wait_s = 0.0, WAIT_FACTOR * config.page_timeout_s
        try:
            while True:
                try:
                    return process.communicate(data, timeout=min(POLL_S, wait_s - waited))
                except subprocess.TimeoutExpired:
                    data, waited = None, waited + POLL_S
                    if waited >= wait_s:
                        raise too_long from None
                    self._stop_if_cancelled(file_name)
        except BaseException:
            process.kill()
            process.communicate()
            raise

    def _stop_if_cancelled(self, file_name: str) -> None:
        if self.cancelled():
            raise IngestCancelledError(
                file_name, "deleted while it was being ingested; nothing of it was kept"
            )
