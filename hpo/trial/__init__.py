"""One trial: a Horovod-on-Ray data-parallel Keras job (driver side and worker side)."""
