"""naiad-backend-tensorflow: serves TensorFlow SavedModel (``model.savedmodel/``) and GraphDef
(``model.graphdef``) models, as Triton's tensorflow backend does (same platforms, parameters,
signature choice and auto-complete)."""
