"""The window laws and their oracles: gate laws, eps-windows and Monte Carlo (gates), the renewal laws (renewal),
exact first passage (exact, on the shared lattice numerics of lattice; atoms in discrete, Markov chains in markov),
and the law tables and their measured errors (lawtable, dependent_errors, bench)."""

__all__ = ["bench", "dependent_errors", "discrete", "exact", "gates", "lattice", "lawtable", "markov", "renewal"]
