#!/bin/sh
# Installs naiad into /opt/naiad (a virtual environment) from the wheels the builder stage made,
# with the plugins the build arguments name, and prepares what the non-root user needs.
# Run by deploy/docker/Dockerfile in the runtime stages (CPU and GPU), as root:
#   install-naiad.sh WHEEL_DIR
# Settings (the Dockerfile's build arguments, passed as environment variables):
#   BACKENDS     backends by name: python onnx torch tensorrt
#   SOURCES      remote repository sources: s3 gcs azure
#   CACHES       response caches: local redis
#   CORE_EXTRAS  extras of the core, comma-separated (gpu: NVML for the nv_gpu_* metrics)
#   ONNXRUNTIME  the ONNX Runtime distribution: onnxruntime, or onnxruntime-gpu (CUDA)
#   TORCH_INDEX_URL  an extra index for torch (the CPU build); empty: PyPI's (CUDA) build
#   NAIAD_UID    the user naiad runs as (1000)
set -eu

wheels=$1
venv=/opt/naiad
python=${PYTHON:-python3}

wheel_of() {  # the wheel file of one distribution, by its normalized name
    found=$(find "$wheels" -maxdepth 1 -name "$1-*.whl" | head -n 1)
    if [ -z "$found" ]; then
        echo "install-naiad: no wheel for $1 in $wheels" >&2
        exit 2
    fi
    echo "$found"
}

core=$(wheel_of naiad)
set -- "$core${CORE_EXTRAS:+[$CORE_EXTRAS]}"
for backend in ${BACKENDS:-}; do
    case $backend in
        python | onnx | torch | tensorrt) ;;
        pytorch) backend=torch ;;
        onnxruntime) backend=onnx ;;
        *) echo "install-naiad: unknown backend '$backend' (python onnx torch tensorrt)" >&2
           exit 2 ;;
    esac
    set -- "$@" "$(wheel_of "naiad_backend_$backend")"
done
for source in ${SOURCES:-}; do
    case $source in
        s3 | gcs | azure) set -- "$@" "$(wheel_of "naiad_source_$source")" ;;
        *) echo "install-naiad: unknown source '$source' (s3 gcs azure)" >&2; exit 2 ;;
    esac
done
for cache in ${CACHES:-}; do
    case $cache in
        local | redis) set -- "$@" "$(wheel_of "naiad_cache_$cache")" ;;
        *) echo "install-naiad: unknown cache '$cache' (local redis)" >&2; exit 2 ;;
    esac
done

"$python" -m venv "$venv"
pip="$venv/bin/python -m pip --no-cache-dir --disable-pip-version-check"
# Wheel files, not names: the plugins' `naiad>=0.1,<0.2` is met by this checkout's core, never by
# whatever an index calls naiad.
case " ${BACKENDS:-} " in
    *" torch "* | *" pytorch "*)
        if [ -n "${TORCH_INDEX_URL:-}" ]; then
            $pip install --extra-index-url "$TORCH_INDEX_URL" "$@"
        else
            $pip install "$@"
        fi ;;
    *) $pip install "$@" ;;
esac
# naiad-backend-onnx requires onnxruntime; onnxruntime-gpu is the same package built for CUDA,
# installed over the same import name, so the CPU build must go first.
case " ${BACKENDS:-} " in
    *" onnx "* | *" onnxruntime "*)
        if [ "${ONNXRUNTIME:-onnxruntime}" != onnxruntime ]; then
            $pip uninstall --yes onnxruntime
            $pip install "$ONNXRUNTIME"
        fi ;;
esac

uid=${NAIAD_UID:-1000}
if ! getent passwd "$uid" >/dev/null; then
    useradd --uid "$uid" --user-group --create-home --shell /usr/sbin/nologin naiad
fi
# XDG_CACHE_HOME: the Python models' environments and remote repositories' mirrors.
mkdir -p /var/cache/naiad /models
chown "$uid" /var/cache/naiad
"$venv/bin/naiad" plugins
