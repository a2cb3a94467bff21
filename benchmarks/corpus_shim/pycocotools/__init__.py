"""The part of pycocotools the PaddleCV detection readers use (COCO annotation look-ups), in plain
Python: this environment has no pycocotools. Evaluation (cocoeval) and masks are not here."""
