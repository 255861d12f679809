"""naiad-source-s3: model repositories in Amazon S3 and S3-compatible stores
(``--model-repository s3://bucket/path``), in the URI forms and with the credentials
tritonserver reads."""

from naiad_source_s3.repository import S3Repository, S3Source
from naiad_source_s3.uri import S3Location, parse_s3_uri

__all__ = ["S3Location", "S3Repository", "S3Source", "parse_s3_uri"]
