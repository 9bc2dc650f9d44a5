"""Images (PNG, JPEG, TIFF) read by OCR: each frame of a TIFF is a page; the type is read
from the bytes, and the pixel count is checked before any image is decoded (image bombs)."""

from __future__ import annotations

import io

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError
from index.loaders.base import DocumentBuilder, paragraphs
from index.loaders.ocr import OCR_MARK, OcrReader, check_pixels
from index.types import Document

_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "TIFF": "image/tiff"}


class ImageLoader:
    media_type = "image/*"
    extensions = (".png", ".jpg", ".jpeg", ".tif", ".tiff")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        from PIL import Image, ImageSequence, UnidentifiedImageError

        ocr.check(file_name)
        try:
            image = Image.open(io.BytesIO(data))  # reads the header only
        except UnidentifiedImageError as exc:
            raise MalformedDocumentError(file_name, "not a PNG, JPEG or TIFF image") from exc
        except Image.DecompressionBombError as exc:  # Pillow's own bound, above ours
            raise FileTooLargeError(
                file_name, f"more pixels than limits.max_image_pixels ({exc})"
            ) from exc
        if image.format not in _FORMATS:
            raise MalformedDocumentError(
                file_name, f"a {image.format} image; PNG, JPEG and TIFF are read"
            )
        frames = getattr(image, "n_frames", 1)
        if frames > limits.max_ocr_pages:
            raise FileTooLargeError(
                file_name,
                f"{frames:,} pages is more than limits.max_ocr_pages ({limits.max_ocr_pages:,})",
            )
        builder = DocumentBuilder(file_name, _FORMATS[image.format], limits)
        for number, frame in enumerate(ImageSequence.Iterator(image), start=1):
            check_pixels(frame.width, frame.height, file_name, limits)
            text = ocr.read(frame.convert("L"), file_name, f"page {number}")
            for paragraph in paragraphs(text):
                builder.add(paragraph, "paragraph", (OCR_MARK,), page=number)
        return builder.build(page_count=frames)
