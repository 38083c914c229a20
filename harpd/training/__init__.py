"""Choosing and training champions, and when: what harpd runs between submissions.

``champions`` trains each candidate model on the store's history and keeps
the one that scores best on a hold-out (the replay's own metric);
``schedule`` decides when to train again (an interval, after N outcomes,
early while the models are young); ``trainer`` runs one training at a time
and hands the new champions to the live predictor.  The live path asks the
predictor (``harpd.predict``) per submission and never imports this
package: the daemon wires the trainer to it.
"""
