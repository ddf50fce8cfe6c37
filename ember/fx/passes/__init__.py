"""Passes over fx graphs (``shape_prop``)."""
