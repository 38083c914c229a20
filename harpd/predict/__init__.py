"""From history to an allocation: guard rails, the live predictor, replay, training, the metric."""
