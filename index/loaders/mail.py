"""E-mail (.eml, RFC 5322) through the standard library's parser: the subject as the heading,
sender, recipients and date, the body (plain text, else the HTML part's text), and text
attachments as sections of their own. Other attachments are named with the reason they were
not read (upload them as files of their own)."""

from __future__ import annotations

from email import policy
from email.parser import BytesParser

from index.config import LoaderLimits
from index.loaders.base import DocumentBuilder, paragraphs
from index.loaders.html import fragment_text
from index.loaders.ocr import OcrReader
from index.types import Document

_TEXT_ATTACHMENTS = ("text/plain", "text/markdown", "text/csv", "text/html")


class MailLoader:
    media_type = "message/rfc822"
    extensions = (".eml",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        message = BytesParser(policy=policy.default).parsebytes(data)
        builder = DocumentBuilder(file_name, self.media_type, limits)
        subject = str(message.get("subject") or "").strip() or "(no subject)"
        path = (subject,)
        builder.add(subject, "heading", path)
        fields = [f"{name}: {message[name]}" for name in ("From", "To", "Cc", "Date")
                  if message.get(name)]  # fmt: skip
        builder.add("\n".join(fields), "paragraph", path)
        body = message.get_body(preferencelist=("plain", "html"))
        if body is not None:
            for paragraph in _text_paragraphs(body):
                builder.add(paragraph, "paragraph", path)
        skipped = []
        for part in message.iter_attachments():
            name = part.get_filename() or "(unnamed)"
            if part.get_content_type() not in _TEXT_ATTACHMENTS:
                skipped.append(f"{name} ({part.get_content_type()})")
                continue
            where = (subject, f"Attachment: {name}")
            builder.add(f"Attachment: {name}", "heading", where)
            for paragraph in _text_paragraphs(part):
                builder.add(paragraph, "paragraph", where)
        if skipped:
            builder.add(
                "Attachments not read here (upload them as files of their own): "
                + ", ".join(skipped),
                "paragraph",
                path,
            )
        return builder.build()


def _text_paragraphs(part) -> list[str]:
    content = part.get_content()
    if isinstance(content, bytes):
        content = content.decode("utf-8", errors="replace")
    if part.get_content_type() == "text/html":
        content = fragment_text(content)
    return paragraphs(content)
