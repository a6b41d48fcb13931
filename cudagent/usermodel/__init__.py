"""A user's own model: built from a file or a transformers directory, its inputs, its hot spots."""
