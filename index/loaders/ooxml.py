"""Office Open XML packages (.docx, .pptx, .xlsx) are zip archives: what is checked before a
parser reads one. The type comes from the bytes (a ".docx" that is really a PDF is refused
naming what it is), and the archive is bounded before anything is decompressed: entry count,
total uncompressed size (a zip bomb declares a small file that expands a thousandfold), no
macros, no encryption (an encrypted Office file is an OLE container, not a zip)."""

from __future__ import annotations

import io
import zipfile

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError, UnsupportedFileError

_ZIP = b"PK\x03\x04"
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted OOXML, and .doc/.ppt/.xls before 2007
_OTHER = {b"%PDF-": "a PDF (rename it .pdf)", b"{\\rtf": "an RTF file"}


def open_package(data: bytes, file_name: str, limits: LoaderLimits, kind: str) -> io.BytesIO:
    """``data`` as a checked OOXML package of ``kind`` ("Word", "PowerPoint", "Excel"), ready
    for its parser; refuses what is not one, or is over the limits."""
    if data.startswith(_OLE):
        raise UnsupportedFileError(
            file_name,
            f"a password-protected or pre-2007 {kind} file (an OLE container): save it without "
            f"a password in the current {kind} format and upload it again",
        )
    if not data.startswith(_ZIP):
        named = next((what for magic, what in _OTHER.items() if data.startswith(magic)), None)
        raise MalformedDocumentError(
            file_name, f"not a {kind} file: it is {named or 'not a zip archive'}"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError) as exc:
        raise MalformedDocumentError(file_name, f"a damaged {kind} file ({exc})") from exc
    if len(entries) > limits.max_zip_entries:
        raise FileTooLargeError(
            file_name,
            f"{len(entries):,} parts in the archive, more than limits.max_zip_entries "
            f"({limits.max_zip_entries:,})",
        )
    expanded = sum(entry.file_size for entry in entries)
    if expanded > limits.max_unzipped_bytes:
        raise FileTooLargeError(
            file_name,
            f"expands to {expanded:,} bytes, more than limits.max_unzipped_bytes "
            f"({limits.max_unzipped_bytes:,})",
        )
    if any(entry.flag_bits & 0x1 for entry in entries):
        raise UnsupportedFileError(file_name, "an encrypted archive: save it without a password")
    if any(entry.filename.lower().endswith("vbaproject.bin") for entry in entries):
        raise UnsupportedFileError(
            file_name, f"a {kind} file with macros: save it as a macro-free file and upload it"
        )
    return io.BytesIO(data)
