"""Text from page images through Tesseract (Debian's tesseract-ocr), one process per page.

Each page's process runs on one core (OMP_THREAD_LIMIT=1) at a lower priority (nice), so a
scan being ingested leaves the CPU to answers first; a page is bounded in pixels and in time.
Text read this way is marked in its heading path (OCR_MARK), so a citation says where its
words came from.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

from index.config import LoaderLimits, OcrConfig
from index.errors import FileTooLargeError, MalformedDocumentError, OcrUnavailableError

OCR_MARK = "scanned, read by OCR"
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
    command = ["nice", "-n", "10", "tesseract", "stdin", "stdout", "-l", languages]
    try:
        done = subprocess.run(
            command,
            input=png.getvalue(),
            capture_output=True,
            timeout=config.page_timeout_s,
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
            check=False,
        )
    except FileNotFoundError as exc:
        raise OcrUnavailableError(file_name, f"Tesseract is not installed: {_INSTALL}") from exc
    except subprocess.TimeoutExpired as exc:
        raise MalformedDocumentError(
            file_name,
            f"OCR of {where} took longer than index.ocr.page_timeout_s "
            f"({config.page_timeout_s:g} s)",
        ) from exc
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
