"""Synthetic data sets in the real formats, and their readers."""
