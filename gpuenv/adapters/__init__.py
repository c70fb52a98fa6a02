"""Thin adapters, one per outside system; heavy imports happen inside their functions."""
