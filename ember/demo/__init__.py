"""``ember demo``: real training runs on data ember ships, with a progress bar, a held-out
evaluation, a checkpoint PyTorch can load and a loss-curve PNG."""
