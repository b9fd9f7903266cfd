"""A model composed from stored figures: Σ count × per-call cost, its rows and coverage."""
