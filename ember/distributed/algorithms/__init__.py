"""``ember.distributed.algorithms``: DDP communication hooks and ``Join``."""
