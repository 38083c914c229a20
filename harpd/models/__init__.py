"""Estimators behind one fit/predict interface (see ``base``), their registry, construction
by name, persistence, and the escalation cost they are calibrated on."""
