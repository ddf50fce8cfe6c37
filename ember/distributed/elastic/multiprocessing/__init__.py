"""torch.distributed.elastic.multiprocessing: its ``errors`` module (``@record``)."""
