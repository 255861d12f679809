"""naiad-backend-fil: serves tree ensembles (XGBoost, LightGBM, scikit-learn and other
Treelite forests) on CPU, as Triton's FIL backend does (same config.pbtxt parameters, model
file names and output shapes)."""
