#!/bin/sh
# get-model.sh DIR — puts the default model under DIR (replaced by the model work).
echo "get-model: no model step yet" >&2
