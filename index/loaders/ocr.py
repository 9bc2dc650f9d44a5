"""Text from page images through Tesseract (Debian's tesseract-ocr), one process per page.

Each page's process runs on one core (OMP_THREAD_LIMIT=1) at the idle priority, so a scan
being ingested leaves the CPU to answers first; a page is bounded in pixels and in time.
Text read this way is marked in its heading path (OCR_MARK), so a citation says where its
words came from.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import signal
import subprocess

from index.config import LoaderLimits, OcrConfig
from index.errors import FileTooLargeError, MalformedDocumentError, OcrUnavailableError

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


def check_ocr(file_name: str, config: OcrConfig) -> None:
    """Refuse before any work when this host cannot read scans as configured."""
    if not config.enabled:
        raise OcrUnavailableError(file_name, "this file needs OCR, and index.ocr.enabled is false")
    if shutil.which("tesseract") is None:
        raise OcrUnavailableError(
            file_name, f"this file needs OCR, and Tesseract is not installed: {_INSTALL}"
        )


def check_pixels(width: int, height: int, file_name: str, limits: LoaderLimits) -> None:
    if width * height > limits.max_image_pixels:
        raise FileTooLargeError(
            file_name,
            f"an image of {width:,} x {height:,} pixels is more than "
            f"limits.max_image_pixels ({limits.max_image_pixels:,})",
        )


def read_image(image, file_name: str, where: str, config: OcrConfig) -> str:
    """The text of one PIL image (``where``: "page 3", for messages)."""
    png = io.BytesIO()
    image.save(png, format="PNG")
    languages = "+".join(config.languages)
    seconds = max(1, math.ceil(config.page_timeout_s))
    limit = ["prlimit", f"--cpu={seconds}"] if _CPU_LIMIT else []
    command = [*_IDLE, *limit, "tesseract", "stdin", "stdout", "-l", languages]
    too_long = MalformedDocumentError(
        file_name,
        f"OCR of {where} took longer than index.ocr.page_timeout_s ({config.page_timeout_s:g} s "
        "of CPU)",
    )
    try:
        done = subprocess.run(
            command,
            input=png.getvalue(),
            capture_output=True,
            timeout=WAIT_FACTOR * config.page_timeout_s,
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
            check=False,
        )
    except FileNotFoundError as exc:
        raise OcrUnavailableError(file_name, f"Tesseract is not installed: {_INSTALL}") from exc
    except subprocess.TimeoutExpired as exc:
        raise too_long from exc
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # over the CPU limit
        raise too_long
    message = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        if "Failed loading language" in message:
            raise OcrUnavailableError(
                file_name,
                f"a Tesseract language pack of index.ocr.languages ({languages}) is not "
                "installed: apt-get install tesseract-ocr-<language>",
            )
        raise MalformedDocumentError(file_name, f"OCR failed on {where}: {message[-300:]}")
    return done.stdout.decode("utf-8", "replace")
