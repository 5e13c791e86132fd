"""The token-id convention shared by every module: one home for these numbers.

0 is padding (and the decoder's start input: targets are shifted right with 0
in front), 1 ends a sentence, 2 is an unknown piece. There is no BOS.
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
