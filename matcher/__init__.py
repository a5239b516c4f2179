"""In-process matching engine: catalogue, embeddings, brand safety, geo, eligibility, ranking."""
