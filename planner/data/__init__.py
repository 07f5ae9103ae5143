"""Training data: token streams and the batches a run takes from them."""
