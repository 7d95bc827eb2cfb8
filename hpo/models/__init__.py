"""Built-in example model builders (``model: hpo.models.mlp:build``)."""
