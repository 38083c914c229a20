"""``harp report``: aggregation over the store (numpy) and its renderers.

Data flows columns -> aggregate.Report -> render_table / render_csv_json /
render_html; only ``source`` talks to the store.
"""

# what a report can be asked for (the CLI's choices and the socket's request alike)
FORMATS = ("table", "csv", "json", "html")
GROUPINGS = ("user", "account", "partition", "signature")
