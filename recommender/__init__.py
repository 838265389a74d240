"""mstrain recommender kit: Wide&Deep, Criteo preprocessing and the multi-level distributed
embedding cache (in the spirit of MindSpore Recommender). Imports only `core`'s public names."""
