"""What only ``harp replay`` runs: the workflow protocols, Sizey's metric, the cores replay (never the live path)."""
