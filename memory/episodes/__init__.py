"""From messages to episodes: boundary detection (segmentation, the per-gap boundary scorer and its
fitted weights, the LLM segmenter) and episode generation (the generator seam, the offline
generator, the LLM generator with its prompts, validation and fallback)."""
