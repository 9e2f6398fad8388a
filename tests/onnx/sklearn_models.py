#!/usr/bin/env python3
"""scikit-learn, XGBoost, LightGBM and CatBoost models converted to ONNX
as their users convert them (skl2onnx; onnxmltools for XGBoost and
LightGBM; CatBoost's own save_model), run by
onnxruntime and by `dlcc run`, compared (docs/onnx.md, "The ML domain").
Not part of `make check`: it needs scikit-learn, skl2onnx and, for the
boosters, xgboost, lightgbm, onnxmltools and catboost from PyPI.

    sklearn_models.py [--dlcc BUILD/dlcc] [--backend ref|emu] [--out DIR] [NAME ...]

Each line: OK with the largest difference of the scores (relative to
their largest magnitude) and whether the labels are equal, WRONG, or
FAIL-RUN with dlcc's message, CONVERT when the converter refuses.
Classifiers are converted with zipmap=False; CatBoost's always end in a
ZipMap, whose maps dlcc writes as the [N, C] scores they zip.
"""
import argparse, os, subprocess, sys, warnings
import numpy as np
warnings.filterwarnings("ignore")
from sklearn.datasets import make_classification, make_regression
from sklearn import (compose, ensemble, linear_model, preprocessing, pipeline, svm, tree, neighbors, decomposition,
                     neural_network, impute, naive_bayes, discriminant_analysis, cluster)
import onnxruntime as ort
from skl2onnx import to_onnx

R = np.random.RandomState(0)
X3, y3 = make_classification(300, 8, n_informative=5, n_classes=3, random_state=0)
X2, y2 = make_classification(300, 8, random_state=1)
Xr, yr = make_regression(300, 8, random_state=0)
Xm, ym = make_regression(300, 8, n_targets=3, random_state=2)
X3, X2, Xr, Xm = (a.astype(np.float32) for a in (X3, X2, Xr, Xm))
Xnan = X3.copy(); Xnan[R.rand(*Xnan.shape) < 0.1] = np.nan
Xcat = np.hstack([R.randint(0, 4, (300, 2)), X3[:, :3]]).astype(np.float32)

def sk(est, X, y):
    return lambda: (est.fit(X, y), X)

MODELS = {
    "rf_cls": sk(ensemble.RandomForestClassifier(10, max_depth=6, random_state=0), X3, y3),
    "rf_bin": sk(ensemble.RandomForestClassifier(10, max_depth=6, random_state=0), X2, y2),
    "rf_reg": sk(ensemble.RandomForestRegressor(10, max_depth=6, random_state=0), Xr, yr),
    "rf_multi": sk(ensemble.RandomForestRegressor(5, max_depth=5, random_state=0), Xm, ym),
    "et_cls": sk(ensemble.ExtraTreesClassifier(10, max_depth=6, random_state=0), X3, y3),
    "et_reg": sk(ensemble.ExtraTreesRegressor(10, max_depth=6, random_state=0), Xr, yr),
    "gb_cls": sk(ensemble.GradientBoostingClassifier(n_estimators=10, random_state=0), X3, y3),
    "gb_bin": sk(ensemble.GradientBoostingClassifier(n_estimators=10, random_state=0), X2, y2),
    "gb_reg": sk(ensemble.GradientBoostingRegressor(n_estimators=10, random_state=0), Xr, yr),
    "hgb_cls": sk(ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), X3, y3),
    "hgb_bin": sk(ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), X2, y2),
    "hgb_reg": sk(ensemble.HistGradientBoostingRegressor(max_iter=10, random_state=0), Xr, yr),
    "hgb_nan": sk(ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), Xnan, y3),
    "dt_cls": sk(tree.DecisionTreeClassifier(max_depth=8, random_state=0), X3, y3),
    "dt_reg": sk(tree.DecisionTreeRegressor(max_depth=8, random_state=0), Xr, yr),
    "ada_cls": sk(ensemble.AdaBoostClassifier(n_estimators=5, random_state=0), X3, y3),
    "iforest": sk(ensemble.IsolationForest(n_estimators=5, random_state=0), Xr, None),
    "logreg": sk(linear_model.LogisticRegression(max_iter=500), X3, y3),
    "logreg_bin": sk(linear_model.LogisticRegression(max_iter=500), X2, y2),
    "sgd_cls": sk(linear_model.SGDClassifier(random_state=0), X3, y3),
    "sgd_bin": sk(linear_model.SGDClassifier(random_state=0), X2, y2),
    "ridge_cls": sk(linear_model.RidgeClassifier(), X3, y3),
    "perceptron": sk(linear_model.Perceptron(random_state=0), X2, y2),
    "linsvc": sk(svm.LinearSVC(), X3, y3),
    "linsvc_bin": sk(svm.LinearSVC(), X2, y2),
    "linreg": sk(linear_model.LinearRegression(), Xr, yr),
    "linreg_multi": sk(linear_model.LinearRegression(), Xm, ym),
    "lasso": sk(linear_model.Lasso(), Xr, yr),
    "svc_rbf": sk(svm.SVC(), X3, y3),
    "svc_prob": sk(svm.SVC(probability=True, random_state=0), X3, y3),
    "svc_bin": sk(svm.SVC(), X2, y2),
    "svc_poly": sk(svm.SVC(kernel="poly", degree=2), X3, y3),
    "svc_lin": sk(svm.SVC(kernel="linear"), X2, y2),
    "svr": sk(svm.SVR(), Xr, yr),
    "svr_sig": sk(svm.SVR(kernel="sigmoid"), Xr, yr),
    "nusvr": sk(svm.NuSVR(), Xr, yr),
    "std_logreg": sk(pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression()), X3, y3),
    "minmax_ridge": sk(pipeline.make_pipeline(preprocessing.MinMaxScaler(), linear_model.Ridge()), Xr, yr),
    "maxabs_rf": sk(pipeline.make_pipeline(preprocessing.MaxAbsScaler(), ensemble.RandomForestClassifier(5, random_state=0)), X3, y3),
    "robust_lin": sk(pipeline.make_pipeline(preprocessing.RobustScaler(), linear_model.LinearRegression()), Xr, yr),
    "norm_l1": sk(pipeline.make_pipeline(preprocessing.Normalizer("l1"), linear_model.LogisticRegression()), X3, y3),
    "norm_l2": sk(pipeline.make_pipeline(preprocessing.Normalizer("l2"), linear_model.LogisticRegression()), X3, y3),
    "norm_max": sk(pipeline.make_pipeline(preprocessing.Normalizer("max"), linear_model.LogisticRegression()), X3, y3),
    "imputer_rf": sk(pipeline.make_pipeline(impute.SimpleImputer(), ensemble.RandomForestClassifier(5, random_state=0)), Xnan, y3),
    "binarizer": sk(pipeline.make_pipeline(preprocessing.Binarizer(), linear_model.LogisticRegression()), X3, y3),
    "pca_knn": sk(pipeline.make_pipeline(decomposition.PCA(4), neighbors.KNeighborsClassifier(3)), X3, y3),
    "knn_reg": sk(neighbors.KNeighborsRegressor(3), Xr, yr),
    "mlp_cls": sk(neural_network.MLPClassifier((16,), max_iter=300, random_state=0), X3, y3),
    "mlp_reg": sk(neural_network.MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=0), Xr, yr),
    "gnb": sk(naive_bayes.GaussianNB(), X3, y3),
    "lda": sk(discriminant_analysis.LinearDiscriminantAnalysis(), X3, y3),
    "kmeans": sk(cluster.KMeans(3, n_init=1, random_state=0), X3, None),
    "onehot_ct": sk(pipeline.make_pipeline(compose.ColumnTransformer(
        [("oh", preprocessing.OneHotEncoder(handle_unknown="ignore"), [0, 1]), ("sc", preprocessing.StandardScaler(), [2, 3, 4])]),
        linear_model.LogisticRegression()), Xcat, y3),
    "onehot_err": sk(pipeline.make_pipeline(compose.ColumnTransformer(
        [("oh", preprocessing.OneHotEncoder(), [0, 1]), ("pass", "passthrough", [2, 3, 4])]),
        tree.DecisionTreeClassifier(max_depth=5, random_state=0)), Xcat, y3),
    "poly_ridge": sk(pipeline.make_pipeline(preprocessing.PolynomialFeatures(2), linear_model.Ridge()), Xr, yr),
}

def boosters():
    import xgboost, lightgbm
    try:
        import catboost
        cb = {"cb_cls": sk(catboost.CatBoostClassifier(iterations=10, depth=4, verbose=0, random_seed=0, allow_writing_files=False), X3, y3),
              "cb_bin": sk(catboost.CatBoostClassifier(iterations=10, depth=4, verbose=0, random_seed=0, allow_writing_files=False), X2, y2),
              "cb_reg": sk(catboost.CatBoostRegressor(iterations=10, depth=4, verbose=0, random_seed=0, allow_writing_files=False), Xr, yr)}
    except ImportError:
        cb = {}
    return {**cb,
        "xgb_cls": sk(xgboost.XGBClassifier(n_estimators=10, max_depth=4), X3, y3),
        "xgb_bin": sk(xgboost.XGBClassifier(n_estimators=10, max_depth=4), X2, y2),
        "xgb_reg": sk(xgboost.XGBRegressor(n_estimators=10, max_depth=4), Xr, yr),
        "lgbm_cls": sk(lightgbm.LGBMClassifier(n_estimators=10, num_leaves=15, verbose=-1), X3, y3),
        "lgbm_bin": sk(lightgbm.LGBMClassifier(n_estimators=10, num_leaves=15, verbose=-1), X2, y2),
        "lgbm_reg": sk(lightgbm.LGBMRegressor(n_estimators=10, num_leaves=15, verbose=-1), Xr, yr),
    }

def convert(name, model, X):
    if name.startswith("cb_"):  # CatBoost writes ONNX itself
        import onnx, tempfile
        with tempfile.TemporaryDirectory() as d:
            model.save_model(os.path.join(d, "m.onnx"), format="onnx")
            return onnx.load(os.path.join(d, "m.onnx"))
    if name.startswith(("xgb", "lgbm")):
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType
        conv = onnxmltools.convert_xgboost if name.startswith("xgb") else onnxmltools.convert_lightgbm
        kw = {"zipmap": False} if name.startswith("lgbm") else {}
        return conv(model, initial_types=[("X", FloatTensorType([None, X.shape[1]]))], target_opset=15, **kw)
    opts = {id(model): {"zipmap": False}} if hasattr(model, "classes_") else None
    try:
        return to_onnx(model, X[:1], options=opts, target_opset={"": 17, "ai.onnx.ml": 3})
    except Exception:  # noqa: BLE001 - a pipeline's options are its last step's
        return to_onnx(model, X[:1], target_opset={"": 17, "ai.onnx.ml": 3},
                       options={id(model.steps[-1][1]): {"zipmap": False}} if hasattr(model, "steps") else None)

def one(name, args):
    model, X = MODELS[name]()
    try:
        onx = convert(name, model, X)
    except Exception as e:  # noqa: BLE001 - the converter's refusal is a result
        return "CONVERT " + str(e).splitlines()[0][:200]
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    open(path, "wb").write(onx.SerializeToString())
    x = X[R.choice(len(X), 32, replace=False)]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {sess.get_inputs()[0].name: x}
    want = sess.run(None, feeds)
    cmd = [args.dlcc, "run", path, f"--backend={args.backend}", f"--output-dir={d}"]
    for k, v in feeds.items():
        np.save(os.path.join(d, k + ".in.npy"), v)
        cmd += ["--input", f"{k}={os.path.join(d, k + '.in.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode:
        return "FAIL-RUN " + (r.stderr.strip().splitlines() or ["?"])[-1][:300]
    notes, ok = [], True
    for o, v in zip(sess.get_outputs(), want):
        if isinstance(v, list):  # ZipMap's maps: dlcc writes the scores they zip, in the labels' order
            v = np.array([list(m.values()) for m in v], dtype=np.float32)
        got = np.load(os.path.join(d, o.name + ".npy"))
        if got.shape != v.shape and got.size == v.size:
            got = got.reshape(v.shape)
        if got.shape != v.shape:
            return f"WRONG {o.name}: shape {got.shape}, onnxruntime {v.shape}"
        if v.dtype.kind in "iub":
            same = int((got == v).sum())
            ok &= same == v.size
            notes.append(f"{o.name} {same}/{v.size} equal")
        else:
            rel = float(np.max(np.abs(got.astype(np.float64) - v)) / (np.max(np.abs(v)) + 1e-12))
            ok &= rel < 1e-4
            notes.append(f"{o.name} {rel:.1e}")
    return ("OK " if ok else "WRONG ") + ", ".join(notes)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--dlcc", default=os.path.join(os.path.dirname(__file__), "..", "..", "dlcc"))
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--out", default="/tmp/dlcc-sklearn")
    args = ap.parse_args()
    try:
        MODELS.update(boosters())
    except ImportError:
        pass
    bad = 0
    for name in args.names or list(MODELS):
        res = one(name, args)
        bad += not res.startswith(("OK", "CONVERT"))
        print(f"{name:14s} {res}", flush=True)
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
