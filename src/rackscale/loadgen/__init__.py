"""``rackscale loadgen``: the real MLPerf LoadGen (PyPI ``mlcommons-loadgen``) against an HTTP inference
endpoint, and the plan's cost efficiency (docs/loadgen.md).

The library is imported only when a run starts (:func:`rackscale.loadgen.settings.import_loadgen`), so this
package, its parsers and its validation import without the ``loadgen`` extra."""
