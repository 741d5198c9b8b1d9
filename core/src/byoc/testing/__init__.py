"""Test helpers for byoc and for backend authors (also a pytest plugin: ``byoc.testing``)."""

from byoc.testing.kit import assert_matches_onnxruntime, random_inputs

__all__ = ["assert_matches_onnxruntime", "random_inputs"]
