"""``harp report``: aggregation over the store (numpy) and its renderers.

Data flows columns -> aggregate.Report -> render_table / render_csv_json /
render_html; only ``source`` talks to the store.  What a report may be asked
for (formats, groupings) is the wire contract's: ``harpd.protocol.REPORT_FORMATS``
and ``REPORT_GROUPINGS``.
"""
