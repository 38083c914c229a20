"""From history to an allocation: guard rails, the live predictor, dataset preparation,
replay, reference bounds, training, the metric."""
