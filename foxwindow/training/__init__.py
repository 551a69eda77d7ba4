"""Training the FoX language model: the corpus (data), training (train), torchrun (distributed) and how far each
attention kind reaches (reach)."""

__all__ = ["data", "distributed", "reach", "train"]
