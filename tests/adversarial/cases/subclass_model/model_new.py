import model

import cuda_extension  # noqa: F401


class ModelNew(model.Model):
    pass
