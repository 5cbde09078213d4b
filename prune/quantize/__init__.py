"""The quantization family: weight-only int8 and int4 through torchao, after any other step."""
