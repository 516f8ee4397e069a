// Softmax cross-entropy over the vocabulary. The fused form computes the loss and writes
// the logit gradient in place, so the (N, V) logits buffer is never held twice.
#pragma once

namespace mt {

// losses (N) = logsumexp(logits[n]) - logits[n, targets[n]] over the first V columns of a
// row of stride ldv (ldv >= V; padding columns are ignored).
void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V,
                          int ldv);

// Same losses, then logits (N, ldv) is overwritten with dloss * (softmax - onehot(target));
// padding columns V..ldv-1 get 0.
void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int ldv);

}  // namespace mt
