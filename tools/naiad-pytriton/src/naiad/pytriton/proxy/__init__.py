"""What runs inside naiad's Python backend: the model.py every bound callable is served by
(model.py) and the runner that calls the callable (runtime.py); ``types``: Request, Response."""
