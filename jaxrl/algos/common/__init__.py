"""Pieces every algorithm shares: batching over a data mesh, the optimiser, the training loop."""
