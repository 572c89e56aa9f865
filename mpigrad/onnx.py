"""`mpigrad.onnx`: torch.onnx's names, so scripts that import it at their top run. mpigrad
cannot export ONNX graphs (it traces nothing into a graph format); calling `export` says so
and how to get the file with PyTorch."""


class OnnxExporterError(RuntimeError):
    """torch.onnx's error type for a failed export."""


def export(model, args=(), f=None, *unused_args, **unused_kwargs):
    raise NotImplementedError(
        "mpigrad.onnx.export: mpigrad cannot export ONNX. Save the weights with "
        "mpigrad.save(model.state_dict(), 'model.pt'), load them into the same model built "
        "with PyTorch (torch.load('model.pt') then load_state_dict) and call "
        "torch.onnx.export there.")


def is_in_onnx_export():
    """No export ever runs here."""
    return False
