"""A user model module for the tests: fails on purpose when ``params['fail']`` is true."""

from __future__ import annotations

from hpo.models.mlp import build as mlp


def build(params, input_shape, num_classes):
    if params.get("fail"):
        raise RuntimeError("this configuration is broken on purpose")
    return mlp(params, input_shape, num_classes)
