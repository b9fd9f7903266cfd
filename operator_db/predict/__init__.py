"""Cost models of what is not measured yet: features, fits with intervals, versions, evaluation."""
