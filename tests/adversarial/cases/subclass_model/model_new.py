import cuda_extension  # noqa: F401
import model


class ModelNew(model.Model):
    pass
