"""Local sentence-transformers embeddings (the bundled all-MiniLM-L6-v2, or a local model), the ONNX
backends, and the lazy wrapper that loads the model only when something is embedded."""
