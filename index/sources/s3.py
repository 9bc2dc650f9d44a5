"""An S3 source: a bucket and prefix on any S3-compatible endpoint (MinIO, Ceph's RADOS
Gateway, AWS) through boto3 (Apache-2.0), path-style. The listing streams pages of 1,000 keys
(``ListObjectsV2``) with each object's size, modification time and ETag; objects are read
with ``GetObject``. Bucket policies and IAM are the store's own: nothing of them reaches
Grounded, whose access comes from the source's rules."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from index.sources.kinds import Entry, SourceUnreachableError, wanted

TIMEOUT_S = 30.0


class S3Source:
    kind = "s3"

    def __init__(self, location: str, key_id: str | None, secret: str | None) -> None:
        """``location``: ``https://host:port/bucket/prefix``, or ``bucket/prefix`` on AWS."""
        self._location = location
        endpoint = None
        if "://" in location:
            url = urlsplit(location)
            endpoint, location = f"{url.scheme}://{url.netloc}", url.path
        self.bucket, _, prefix = location.strip("/").partition("/")
        self.prefix = f"{prefix}/" if prefix else ""
        config = Config(s3={"addressing_style": "path"}, connect_timeout=TIMEOUT_S,
                        read_timeout=TIMEOUT_S, retries={"max_attempts": 3})  # fmt: skip
        self._client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=key_id,
            aws_secret_access_key=secret, config=config,
        )  # fmt: skip

    @property
    def location(self) -> str:
        return self._location

    def entries(self) -> Iterator[Entry]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        try:
            for page in pages:
                for item in page.get("Contents", ()):
                    path = item["Key"][len(self.prefix) :]
                    if wanted(path):
                        mtime_ns = int(item["LastModified"].timestamp() * 1e9)
                        yield Entry(path, item["Size"], mtime_ns, item["ETag"].strip('"'))
        except (BotoCoreError, ClientError) as exc:
            raise SourceUnreachableError(
                f"cannot list s3 bucket {self.bucket!r} under {self.prefix or '/'!r} "
                f"({_reason(exc)}): nothing was changed; check the endpoint, the bucket and "
                "the source's credentials"
            ) from exc

    def read(self, path: str) -> bytes:
        try:
            reply = self._client.get_object(Bucket=self.bucket, Key=self.prefix + path)
            return reply["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            raise OSError(f"s3 object {path}: {_reason(exc)}") from exc


def _reason(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return str(exc)
