"""pycocotools.coco.COCO: index a COCO instances JSON; the look-ups the readers call."""
import json


class COCO(object):
    def __init__(self, annotation_file=None):
        self.dataset = {"images": [], "annotations": [], "categories": []}
        if annotation_file:
            with open(annotation_file) as f:
                self.dataset = json.load(f)
        self.imgs = {i["id"]: i for i in self.dataset.get("images", [])}
        self.anns = {a["id"]: a for a in self.dataset.get("annotations", [])}
        self.cats = {c["id"]: c for c in self.dataset.get("categories", [])}
        self.imgToAnns = {}
        for a in self.dataset.get("annotations", []):
            self.imgToAnns.setdefault(a["image_id"], []).append(a)

    @staticmethod
    def _list(x):
        return list(x) if isinstance(x, (list, tuple)) else ([] if x is None else [x])

    def getImgIds(self, imgIds=(), catIds=()):
        ids = self._list(imgIds) or list(self.imgs)
        cats = set(self._list(catIds))
        if cats:
            ids = [i for i in ids if any(a["category_id"] in cats for a in self.imgToAnns.get(i, []))]
        return ids

    def getCatIds(self, catNms=(), supNms=(), catIds=()):
        return [c for c in self.cats if (not self._list(catNms) or self.cats[c]["name"] in catNms)]

    def getAnnIds(self, imgIds=(), catIds=(), areaRng=(), iscrowd=None):
        imgs = self._list(imgIds)
        anns = [a for i in imgs for a in self.imgToAnns.get(i, [])] if imgs else list(self.anns.values())
        cats = set(self._list(catIds))
        return [a["id"] for a in anns if (not cats or a["category_id"] in cats)
                and (iscrowd is None or bool(a.get("iscrowd", 0)) == bool(iscrowd))]

    def loadImgs(self, ids=()):
        return [self.imgs[i] for i in self._list(ids)]

    def loadAnns(self, ids=()):
        return [self.anns[i] for i in self._list(ids)]

    def loadCats(self, ids=()):
        return [self.cats[i] for i in self._list(ids)]
