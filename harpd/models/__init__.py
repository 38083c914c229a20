"""Estimators behind one fit/predict interface (see ``base``), and their registry."""
