"""What the laws are used for: ACP block pruning and KV-cache horizons (prune, prune_laws, prune_measure,
prune_report) and chunk-size safety of chunked kernels (chunks, chunks_report)."""

__all__ = ["chunks", "chunks_report", "prune", "prune_laws", "prune_measure", "prune_report"]
