"""naiad-backend-openvino: serves OpenVINO IR (``model.xml`` + ``model.bin``) and ONNX models
with OpenVINO on CPU, as Triton's openvino backend does (same parameters, auto-complete and
file names)."""
