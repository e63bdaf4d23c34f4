"""epimem's domain and write path: models, settings, storage, segmentation, episode generation."""
